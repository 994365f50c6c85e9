# dataplane/model — (empty until its module lands)
