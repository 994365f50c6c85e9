# sql/ — (empty until its module lands)
