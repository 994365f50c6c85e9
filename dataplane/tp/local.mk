# dataplane/tp — (empty until its module lands)
