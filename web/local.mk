# web/ — (empty until its module lands)
