/*
 * tdm/config.h — the tunables of tandem-worker and tandemd, one line each (docs/contracts.md §a).
 *
 * Flag names follow SGLang where the concept exists there, with SGLang's defaults unless noted
 * in the help text; ports per docs/contracts.md §b. The lists below are the single declaration: the
 * config structs, the parser tables (common/params_worker.c, common/params_tandemd.c),
 * --help, --print-config and docs/params.md (tools/gen-params-doc) are all generated from them.
 * Add a tunable by adding one line here; regenerate the docs with `make params-doc`.
 *
 * Usage:
 *   tdm_worker_config_t cfg;
 *   tdm_params_t *p;
 *   TDM_TRY(tdm_params_init(&tdm_worker_config_table, &cfg, &p, err, sizeof(err)));
 *   st = tdm_params_load(p, argc, argv, NULL, err, sizeof(err));
 *   ... cfg.tp_size, cfg.kv_cache_dtype ... valid until tdm_params_free(p).
 */
#ifndef TDM_CONFIG_H
#define TDM_CONFIG_H

#include <tdm/params.h>

/* clang-format off */
#define TDM_WORKER_PARAMS(P) \
    P(model_path, "TDM_MODEL_PATH", "--model-path", STRING, "", "", "Checkpoint directory (config.json, tokenizer.json, *.safetensors)") \
    P(served_model_name, "TDM_SERVED_MODEL_NAME", "--served-model-name", STRING, "", "", "Model name in the OpenAI API (default: the model path)") \
    P(tool_call_parser, "TDM_TOOL_CALL_PARSER", "--tool-call-parser", ENUM, "auto", "auto|dsml|hermes|llama3|mistral|deepseekv3", "Tool-call format parsed out of chat replies (auto = the one the chat template prints)") \
    P(chat_template, "TDM_CHAT_TEMPLATE", "--chat-template", STRING, "", "", "Chat template override: a Jinja file, a built-in (demo, chatml, llama3, llama2) or a name in the checkpoint's template list (empty = the checkpoint's)") \
    P(disaggregation_mode, "TDM_DISAGGREGATION_MODE", "--disaggregation-mode", ENUM, "null", "null|prefill|decode", "Role of this group: prefill, decode, or null (colocated)") \
    P(disaggregation_bootstrap_port, "TDM_DISAGGREGATION_BOOTSTRAP_PORT", "--disaggregation-bootstrap-port", INT64, "8998", "0..65535", "Prefill bootstrap listener port (0 = any free port)") \
    P(disaggregation_prefill_addr, "TDM_DISAGGREGATION_PREFILL_ADDR", "--disaggregation-prefill-addr", STRING, "", "", "Decode: the prefill group's bootstrap address host:port (required with --disaggregation-mode decode)") \
    P(disaggregation_disable_checksums, "TDM_DISAGGREGATION_DISABLE_CHECKSUMS", "--disaggregation-disable-checksums", BOOL, "false", "", "PD: turn off the per-page KV checksums (prefill computes, decode verifies before the first decode step); both groups must agree or decode refuses the registration") \
    P(disaggregation_disable_decode_prefix, "TDM_DISAGGREGATION_DISABLE_DECODE_PREFIX", "--disaggregation-disable-decode-prefix", BOOL, "false", "", "PD decode: do not match prompts against this worker's prefix cache and HiCache tier at admission (every prompt page is transferred; by default the room names only the pages decode does not hold)") \
    P(disaggregation_bootstrap_timeout, "TDM_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "--disaggregation-bootstrap-timeout", DOUBLE, "300", "0.1..86400", "Seconds a room may wait in bootstrap; also how long prefill keeps tombstones (I4)") \
    P(tp_size, "TDM_TP_SIZE", "--tp-size", INT64, "1", "1..64", "Tensor parallel size: ranks (processes, GPUs) in the group") \
    P(rank, "TDM_RANK", "--rank", INT64, "-1", "-1..63", "Rank of this process; -1 = launcher, which spawns ranks 0..tp-1") \
    P(base_gpu_id, "TDM_BASE_GPU_ID", "--base-gpu-id", INT64, "0", "0..1023", "First GPU index; rank r uses base + r") \
    P(device, "TDM_DEVICE", "--device", ENUM, "cuda", "cuda|cpu", "Compute device") \
    P(cuda_backend, "TDM_CUDA_BACKEND", "--cuda-backend", STRING, "", "", "backend-cuda.so that --device cuda loads in a worker built without the CUDA runtime (empty = the tandem-cuda package's, in the package library directory)") \
    P(mem_fraction_static, "TDM_MEM_FRACTION_STATIC", "--mem-fraction-static", DOUBLE, "0.88", "0.05..0.99", "Fraction of GPU memory for weights + KV pool") \
    P(kv_cpu_bytes, "TDM_KV_CPU_BYTES", "--kv-cpu-bytes", INT64, "268435456", "4096..", "KV pool bytes per rank on --device cpu") \
    P(kv_cache_dtype, "TDM_KV_CACHE_DTYPE", "--kv-cache-dtype", ENUM, "auto", "auto|bf16|fp8_e4m3", "KV cache element type (auto = model dtype); pair-wide") \
    P(page_size, "TDM_PAGE_SIZE", "--page-size", INT64, "16", "1..4096", "Tokens per KV page (SGLang defaults to 1; paged transfer wants more)") \
    P(chunked_prefill_size, "TDM_CHUNKED_PREFILL_SIZE", "--chunked-prefill-size", INT64, "8192", "-1..1048576", "Max prompt tokens per prefill iteration (-1 = no chunking)") \
    P(disable_overlap_schedule, "TDM_DISABLE_OVERLAP_SCHEDULE", "--disable-overlap-schedule", BOOL, "false", "", "Run the normal (non-overlapped) scheduler loop") \
    P(enable_hierarchical_cache, "TDM_ENABLE_HIERARCHICAL_CACHE", "--enable-hierarchical-cache", BOOL, "false", "", "Enable the host-memory KV tier (HiCache)") \
    P(hicache_ratio, "TDM_HICACHE_RATIO", "--hicache-ratio", DOUBLE, "2.0", "1.0..100", "Host tier size as a multiple of the device KV pool") \
    P(hicache_size, "TDM_HICACHE_SIZE", "--hicache-size", INT64, "0", "0..1048576", "Host tier size in GiB; overrides --hicache-ratio when > 0") \
    P(hicache_write_policy, "TDM_HICACHE_WRITE_POLICY", "--hicache-write-policy", ENUM, "write_through", "write_back|write_through|write_through_selective", "When device pages are copied to the host tier") \
    P(hicache_mem_layout, "TDM_HICACHE_MEM_LAYOUT", "--hicache-mem-layout", ENUM, "layer_first", "layer_first|page_first", "Host tier layout: the device pool's (layer_first) or one page contiguous (page_first)") \
    P(hicache_io_backend, "TDM_HICACHE_IO_BACKEND", "--hicache-io-backend", ENUM, "kernel", "kernel|direct", "Host-to-device load path: one gather pass per layer (kernel) or one copy per contiguous run (direct)") \
    P(hicache_verify_rate, "TDM_HICACHE_VERIFY_RATE", "--hicache-verify-rate", DOUBLE, "0.0625", "0..1", "Share of host-tier loads whose device pages are checked against the source checksums (0 = none, 1 = all)") \
    P(hicache_poison, "TDM_HICACHE_POISON", "--hicache-poison", BOOL, "false", "", "Canary mode: poison load destinations and count attention reads of poison (CORRUPTION)") \
    P(hicache_force_layout, "TDM_HICACHE_FORCE_LAYOUT", "--hicache-force-layout", BOOL, "false", "", "Test only: start even when the host and device layouts differ") \
    P(max_running_requests, "TDM_MAX_RUNNING_REQUESTS", "--max-running-requests", INT64, "0", "0..65536", "Max requests in a batch (0 = sized from the KV pool)") \
    P(max_queued_requests, "TDM_MAX_QUEUED_REQUESTS", "--max-queued-requests", INT64, "4096", "1..1048576", "Max waiting requests; more are refused with 503") \
    P(max_request_bytes, "TDM_MAX_REQUEST_BYTES", "--max-request-bytes", INT64, "8388608", "1024..1073741824", "Largest HTTP request body accepted") \
    P(api_key, "TDM_API_KEY", "--api-key", SECRET, "", "", "Bearer key required by the OpenAI endpoint (empty = none)") \
    P(host, "TDM_HOST", "--host", STRING, "127.0.0.1", "", "HTTP listen address") \
    P(port, "TDM_PORT", "--port", INT64, "-1", "-1..65535", "HTTP port; -1 = 30000 (decode/colocated) or 30001 (prefill); 0 = any") \
    P(group, "TDM_GROUP", "--group", STRING, "", "", "Worker group name reported to the control plane (default: <mode>-<port>)") \
    P(control_plane, "TDM_CONTROL_PLANE", "--control-plane", STRING, "", "", "tandemd base URL for registration and telemetry (empty = standalone)") \
    P(control_plane_token_file, "TDM_CONTROL_PLANE_TOKEN_FILE", "--control-plane-token-file", STRING, "", "", "File with the bearer token telemetry is posted with (tandemd admin.token, or one from tandemctl token create)") \
    P(admin_token_file, "TDM_ADMIN_TOKEN_FILE", "--admin-token-file", STRING, "", "", "File holding the token for /admin (empty = /admin disabled)") \
    P(ready_file, "TDM_READY_FILE", "--ready-file", STRING, "", "", "Write {\"http\":N,\"bootstrap\":N} here after bind") \
    P(spool_dir, "TDM_SPOOL_DIR", "--spool-dir", STRING, "", "", "Telemetry spool directory while tandemd is unreachable (empty = memory only)") \
    P(health_progress_timeout, "TDM_HEALTH_PROGRESS_TIMEOUT", "--health-progress-timeout", DOUBLE, "3.0", "0.1..3600", "Seconds without progress (with work pending) before /health fails (I8)") \
    P(drain_timeout, "TDM_WORKER_DRAIN_TIMEOUT", "--drain-timeout", DOUBLE, "60", "0..86400", "SIGTERM: seconds to finish the running requests (new ones refused) before exiting; 0 = exit at once") \
    P(enable_fault_injection, "TDM_ENABLE_FAULT_INJECTION", "--enable-fault-injection", BOOL, "false", "", "Allow arming fault points through /admin/faults") \
    P(fault_at_start, "TDM_FAULT_AT_START", "--fault-at-start", STRING, "", "", "Fault points armed on rank 0 before the pools are built, comma-separated (needs --enable-fault-injection)") \
    P(prompt, "TDM_PROMPT", "--prompt", STRING, "", "", "One-shot: prompt text (prints one JSON line and exits)") \
    P(prompt_ids, "TDM_PROMPT_IDS", "--prompt-ids", STRING, "", "", "One-shot: comma-separated token ids, used verbatim (no BOS)") \
    P(max_tokens, "TDM_MAX_TOKENS", "--max-tokens", INT64, "16", "1..1048576", "One-shot: tokens to generate") \
    P(ignore_eos, "TDM_IGNORE_EOS", "--ignore-eos", BOOL, "false", "", "One-shot: keep generating past EOS") \
    P(json, "TDM_JSON", "--json", BOOL, "false", "", "One-shot: print the result as one JSON line") \
    P(log_level, "TDM_LOG_LEVEL", "--log-level", ENUM, "info", "debug|info|warn|error", "Least severe log line written")

#define TDM_TANDEMD_PARAMS(P) \
    P(listen, "TDM_LISTEN", "--listen", STRING, "127.0.0.1:8470", "", "HTTP listen address host:port (port 0 = any)") \
    P(pg_dsn, "TDM_PG_DSN", "--pg-dsn", SECRET, "", "", "PostgreSQL connection string (empty = private cluster in the state dir)") \
    P(state_dir, "TDM_STATE_DIR", "--state-dir", STRING, "/var/lib/tandem", "", "Supervisor records, override files, embedded PostgreSQL") \
    P(migrate, "TDM_MIGRATE", "--migrate", BOOL, "false", "", "Apply pending SQL migrations and exit") \
    P(alert_webhook, "TDM_ALERT_WEBHOOK", "--alert-webhook", STRING, "", "", "URL that receives a JSON POST for each alert opened or resolved") \
    P(alert_policy, "TDM_ALERT_POLICY", "--alert-policy", STRING, "", "", "Remediation policy per alert class: CLASS=notify|auto,... or all=auto") \
    P(ingest_buffer_bytes, "TDM_INGEST_BUFFER_BYTES", "--ingest-buffer-bytes", INT64, "67108864", "0..", "Telemetry kept in memory while the database lags or is down; beyond it batches go to the spool") \
    P(spool_max_bytes, "TDM_SPOOL_MAX_BYTES", "--spool-max-bytes", INT64, "1073741824", "0..", "Bound of state_dir/ingest.spool; when full, ingest answers 503") \
    P(retention_days, "TDM_RETENTION_DAYS", "--retention-days", INT64, "14", "0..36500", "Days of samples and events kept (whole day partitions dropped; 0 = keep all)") \
    P(print_routes, "TDM_PRINT_ROUTES", "--print-routes", BOOL, "false", "", "Print the REST route table (method path role max_body) and exit") \
    P(ready_file, "TDM_TANDEMD_READY_FILE", "--ready-file", STRING, "", "", "Write {\"http\":N} here after bind") \
    P(groups_config, "TDM_GROUPS_CONFIG", "--groups-config", STRING, "", "", "Worker groups INI ([group.NAME] sections, docs/groups.md) that tandemd starts and supervises (empty = none)") \
    P(worker_bin, "TDM_WORKER_BIN", "--worker-bin", STRING, "tandem-worker", "", "tandem-worker executable for supervised groups ($PATH lookup)") \
    P(canary_interval, "TDM_CANARY_INTERVAL", "--canary-interval", DOUBLE, "30", "0..86400", "Seconds between canary prompts through each ready group (0 = off)") \
    P(start_timeout, "TDM_START_TIMEOUT", "--start-timeout", DOUBLE, "300", "1..86400", "Seconds a started group has to become /ready") \
    P(drain_timeout, "TDM_DRAIN_TIMEOUT", "--drain-timeout", DOUBLE, "300", "1..86400", "Seconds a drain may take before the action fails") \
    P(start_retries, "TDM_START_RETRIES", "--start-retries", INT64, "5", "0..1000", "Times in a row a supervised group's failed start is retried before it stays failed (an operator's restart starts over)") \
    P(start_backoff_max, "TDM_START_BACKOFF_MAX", "--start-backoff-max", DOUBLE, "30", "1..86400", "Longest wait in seconds before retrying a failed start (1 s, doubling each time)") \
    P(stable_window, "TDM_STABLE_WINDOW", "--stable-window", DOUBLE, "60", "1..86400", "Seconds a supervised group must stay ready before its failures in a row are forgotten; an exit or remedy sooner counts as a failed start") \
    P(log_level, "TDM_LOG_LEVEL", "--log-level", ENUM, "info", "debug|info|warn|error", "Least severe log line written")
/* clang-format on */

TDM_PARAMS_STRUCT(tdm_worker_config, TDM_WORKER_PARAMS);
TDM_PARAMS_STRUCT(tdm_tandemd_config, TDM_TANDEMD_PARAMS);

extern const tdm_param_table_t tdm_worker_config_table;
extern const tdm_param_table_t tdm_tandemd_config_table;

/* Effective HTTP port of a worker: --port, or the docs/contracts.md §b default for its mode when
 * -1. */
int tdm_worker_config_http_port(const tdm_worker_config_t *cfg);

/* The whole of docs/params.md (tools/gen-params-doc writes it; test-params compares). */
void tdm_config_doc_markdown(FILE *out);

#endif
