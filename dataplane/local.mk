# dataplane/ — the engine and the serving runtime. Each module owns its fragment.
include dataplane/model/local.mk
include dataplane/model/graph.mk
include dataplane/kv/local.mk
include dataplane/tokenizer/local.mk
include dataplane/sample/local.mk
include dataplane/xfer/local.mk
include dataplane/sched/local.mk
include dataplane/tp/local.mk
include dataplane/api/local.mk
include dataplane/report/local.mk
include dataplane/worker.mk
