# bench/ — (empty until its module lands)
