# dataplane/kv — (empty until its module lands)
