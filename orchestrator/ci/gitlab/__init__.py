"""GitLab Runner's custom executor: the driver ``sandboxctl ci gitlab config|prepare|run|cleanup``."""
