# tools/ — (empty until its module lands)
