"""Loaded by child Python processes of `jaxplace run --follow-children` (this directory is put
first on their PYTHONPATH). Starts recording in the child when it imports JAX, then runs the
sitecustomize this one shadows, if any. Never lets an error reach the child."""


def _boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from jaxplace_cli.capture.child import start_child
    except ImportError:  # another interpreter: find jaxplace_cli next to this file's package
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(here))))
        try:
            from jaxplace_cli.capture.child import start_child
        except ImportError:
            start_child = None
    if start_child is not None:
        try:
            start_child()
        except Exception:  # noqa: BLE001 - the child must run as if jaxplace were not there
            pass
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_boot()
del _boot
