# dataplane/api — (empty until its module lands)
