# kernels/ — (empty until its module lands)
