# Prints what a script can observe about how it was started; compared against plain python.
import json
import os
import sys

print(json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
                  "file": __file__}))
print("to stderr", file=sys.stderr)
