# dataplane/xfer — (empty until its module lands)
