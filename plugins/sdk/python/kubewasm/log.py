"""Log lines in the host's log, under the plugin's name and the key being reconciled."""

from wit_world.imports import log as _host


def trace(message: str) -> None:
    """Very detailed tracing."""
    _host.log(_host.Level.TRACE, message)


def debug(message: str) -> None:
    """Diagnostic detail."""
    _host.log(_host.Level.DEBUG, message)


def info(message: str) -> None:
    """Normal operation."""
    _host.log(_host.Level.INFO, message)


def warn(message: str) -> None:
    """Something unexpected that the plugin handled."""
    _host.log(_host.Level.WARN, message)


def error(message: str) -> None:
    """Something failed."""
    _host.log(_host.Level.ERROR, message)
