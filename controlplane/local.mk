# controlplane/ — (empty until its module lands)
