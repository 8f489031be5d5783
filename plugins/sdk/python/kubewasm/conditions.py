"""Status conditions with apimachinery's ``meta.SetStatusCondition`` semantics: one condition
per type; ``lastTransitionTime`` moves only when the status changes; reason, message and
``observedGeneration`` always follow the new condition.

Conditions are the dicts of ``status.conditions`` (``type``, ``status``, ``reason``,
``message``, ``observedGeneration``, ``lastTransitionTime``)::

    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    if set_status_condition(conds, new_condition("Ready", True, "Synced", "", generation_of(obj))):
        client.apply_status(...)
"""

from datetime import datetime, timezone
from typing import List, Optional, Union

__all__ = ["new_condition", "set_status_condition", "find_status_condition",
           "is_status_condition_true", "remove_status_condition", "generation_of", "now"]


def now() -> str:
    """The current time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def generation_of(obj: dict) -> Optional[int]:
    """``metadata.generation`` of ``obj``, for a condition's ``observedGeneration``."""
    return obj.get("metadata", {}).get("generation")


def new_condition(type_: str, status: Union[bool, str], reason: str, message: str = "",
                  observed_generation: Optional[int] = None) -> dict:
    """A condition of ``type_``; ``status`` is ``True``/``False`` or ``"True"``, ``"False"``,
    ``"Unknown"``. :func:`set_status_condition` fills ``lastTransitionTime``."""
    if isinstance(status, bool):
        status = "True" if status else "False"
    cond = {"type": type_, "status": status, "reason": reason, "message": message}
    if observed_generation is not None:
        cond["observedGeneration"] = observed_generation
    return cond


def set_status_condition(conditions: List[dict], condition: dict, at: Optional[str] = None) -> bool:
    """Sets ``condition`` in ``conditions`` (in place) like ``meta.SetStatusCondition``: a new
    type is appended with ``lastTransitionTime`` (the condition's own, else ``at``, else now);
    an existing one takes the new status and, only if the status changed, the new
    ``lastTransitionTime``; reason, message and observedGeneration always. Returns whether
    anything changed, so a status write can be skipped when nothing did."""
    stamp = condition.get("lastTransitionTime") or at or now()
    existing = find_status_condition(conditions, condition["type"])
    if existing is None:
        conditions.append({**condition, "lastTransitionTime": stamp})
        return True
    changed = False
    if existing.get("status") != condition.get("status"):
        existing["status"] = condition.get("status")
        existing["lastTransitionTime"] = stamp
        changed = True
    for field in ("reason", "message", "observedGeneration"):
        if existing.get(field) != condition.get(field):
            if condition.get(field) is None:
                existing.pop(field, None)
            else:
                existing[field] = condition[field]
            changed = True
    return changed


def find_status_condition(conditions: Optional[List[dict]], type_: str) -> Optional[dict]:
    """The condition of ``type_``, or ``None`` (``meta.FindStatusCondition``)."""
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_status_condition_true(conditions: Optional[List[dict]], type_: str) -> bool:
    """Whether the condition of ``type_`` is ``"True"`` (``meta.IsStatusConditionTrue``)."""
    cond = find_status_condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"


def remove_status_condition(conditions: List[dict], type_: str) -> bool:
    """Removes the condition of ``type_`` (in place); returns whether it was there
    (``meta.RemoveStatusCondition``)."""
    before = len(conditions)
    conditions[:] = [c for c in conditions if c.get("type") != type_]
    return len(conditions) != before
