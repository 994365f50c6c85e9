# dataplane/report — (empty until its module lands)
