# dataplane — (empty until its module lands)
