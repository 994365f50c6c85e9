# dataplane/sched — (empty until its module lands)
