# dataplane/sample — (empty until its module lands)
