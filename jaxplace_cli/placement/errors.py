"""Policy errors: both carry one line that names what went wrong and what to do."""
from jaxplace_cli.model.errors import JaxplaceError


class PolicyLoadError(JaxplaceError):
    """The policy cannot be used at all (bad file, unknown key, missing callable): exit 2
    before the script starts."""


class PolicyError(JaxplaceError):
    """The policy failed for one op (raised, or chose a device that is not there). Names the
    op, its shapes and the user's file:line."""
