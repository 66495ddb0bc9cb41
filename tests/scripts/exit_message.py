import sys

sys.exit("stopping: bad configuration")
