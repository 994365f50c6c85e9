# packaging/ — (empty until its module lands)
