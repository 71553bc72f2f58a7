"""Formatting for the dashboard templates: hashes, anchors, badges, timestamps, query strings,
budget geometry.

Tags and filters here only format what the view passed in; none of them queries the database.
Every string they build goes through Django's escaping (format_html or autoescape), so untrusted
item content can never become markup.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from manifests.item_labels import ref_label
from manifests.token_figures import token_figures as step_token_figures

register = template.Library()


@register.filter
def short_hash(value: Any, length: int = 12) -> str:
    """`sha256:0123…` kept recognisable: algorithm prefix and the first `length` hex digits."""
    if not value:
        return "—"
    text = str(value)
    algo, sep, digest = text.partition(":")
    return f"{algo}:{digest[:length]}…" if sep and len(digest) > length else text


@register.filter
def item_anchor(item_id: Any) -> str:
    """A stable, markup-safe element id for an item row, whatever characters the item_id holds."""
    return "item-" + hashlib.sha256(str(item_id).encode()).hexdigest()[:16]


@register.filter
def item_label(row: Any, labels: Any = None) -> str:
    """What a reviewer recognises an item by (`manifests.item_labels`), from its decision row or
    record (item_id, kind, source_ref, and `label`: the one its decision stored at seal, or the
    one a view set per row); `labels`
    (item_id -> label, read from the submitted request by the view) names tool results by their
    call and messages by their first words.
    "" when nothing names it beyond its id (the id is shown beside it)."""
    if not isinstance(row, dict):  # a ManifestItem row (its decision's columns read as its own)
        row = {name: getattr(row, name, None) for name in ("item_id", "kind", "source_ref", "label")}
    if row.get("label"):  # set on the row by a view whose rows span steps (/why/)
        return row["label"]
    if isinstance(labels, dict) and labels.get(row.get("item_id")):
        return labels[row.get("item_id")]
    return ref_label(item_id=row.get("item_id"), kind=row.get("kind"), source_ref=row.get("source_ref"))


@register.filter
def compact_json(value: Any) -> str:
    if value is None or value == {}:
        return ""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


@register.filter
def ref_text(source_ref: Any) -> str:
    """A source_ref as `key=value` pairs in a fixed order (still escaped by the template)."""
    if not isinstance(source_ref, dict):
        return "" if source_ref is None else str(source_ref)
    return " ".join(f"{k}={v}" for k, v in source_ref.items())


_GOOD = {"ready", "passed", "retrieved", "included", "success", "applied", "verified", "published", "valid",
         "hit", "isolated_as_data", "fenced_as_state", "confirmed_by_policy", "eligible"}
_BAD = {"blocked", "failed", "excluded", "retrieval_failed", "error", "transform_blocked", "security_rejected",
        "permission_denied", "hard_gate_rejected", "unresolved", "diverged"}
_WARN = {"not_retrieved", "queued", "running", "partial", "draft", "stale_revision", "duplicate", "expired", "unverifiable",
         "budget_evicted", "ranking_lost", "diagnostic_only", "miss", "canceled", "unknown", "bypassed", "redacted",
         "not_evaluated", "pending"}


@register.filter
def tone(value: Any) -> str:
    """The badge colour for a vocabulary word: good / bad / warn / muted."""
    word = str(value or "")
    if word in _GOOD:
        return "good"
    if word in _BAD:
        return "bad"
    if word in _WARN:
        return "warn"
    return "muted"


TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def _as_utc(value: Any) -> datetime | None:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    elif isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime):
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)


@register.filter
def when(value: Any) -> SafeString | str:
    """A timestamp as `<time>`, one format everywhere: `2026-12-02 03:36:39 UTC`, the zone named.
    The machine-readable `datetime` is UTC (ISO 8601 with Z); static/ctxeng/local-time.js rewrites
    the text into the browser's zone when the user chose that. Anything else passes through."""
    moment = _as_utc(value)
    if moment is None:
        return "" if value in (None, "") else str(value)
    return format_html('<time datetime="{}" title="{} UTC">{} UTC</time>', moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       moment.strftime(TIME_FORMAT), moment.strftime(TIME_FORMAT))


@register.filter
def gate_mark(result: Any) -> str:
    return {"passed": "✓", "failed": "✗", "not_evaluated": "·", "not_applicable": "–"}.get(str(result), "?")


@register.filter
def get(mapping: Any, key: Any) -> Any:
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


@register.filter
def minus(value: Any, other: Any) -> Any:
    """`value − other` for two numbers ("" when either is not one): free = usable − used."""
    try:
        return int(value) - int(other)
    except (TypeError, ValueError):
        return ""


@register.filter
def percent_of_one(value: Any) -> str:
    """A share of one (0.9671) as a percentage with one decimal (96.7%): the run page's form."""
    try:
        return f"{100 * float(value):.1f}%"
    except (TypeError, ValueError):
        return "—"


@register.filter
def signed(value: Any) -> str:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return "—"
    return f"+{number}" if number > 0 else str(number)


@register.simple_tag(takes_context=True)
def query(context: dict[str, Any], **changes: Any) -> str:
    """The current query string with `changes` applied (None or "" removes a key), for page links."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = value
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


# --------------------------------------------------------------------------- budget chart

_SEGMENT_COLOURS = ["#3b6fb6", "#4f9a8f", "#b7813a", "#8a5bb0", "#b54e6a", "#5c7a2e", "#2f8fb7", "#9a6b4f"]


@register.inclusion_tag("manifests/partials/budget_chart.html")
def budget_chart(budget: dict[str, Any]) -> dict[str, Any]:
    """Geometry for the SVG budget chart (percent of the model's context limit).

    Top bar: each partition's used tokens stacked, then the unused usable budget, then protocol
    overhead, safety margin and response reserve. Below, one row per partition scaled to the
    usable budget with its used fill and minimum / maximum marks.
    """
    limit = max(int(budget.get("model_context_limit") or 0), 1)
    usable = max(int(budget.get("usable_input") or 0), 1)
    partitions = budget.get("partitions") or {}
    segments, x = [], 0.0
    for index, (name, part) in enumerate(partitions.items()):
        width = 100.0 * int(part.get("used") or 0) / limit
        segments.append({"name": name, "x": x, "width": width, "colour": _SEGMENT_COLOURS[index % len(_SEGMENT_COLOURS)],
                         "tokens": part.get("used") or 0})
        x += width
    figures = step_token_figures(budget)
    if figures.framing:
        segments.append({"name": "framing", "x": x, "width": 100.0 * figures.framing / limit, "colour": "#6b7580",
                         "tokens": figures.framing})
        x += 100.0 * figures.framing / limit
    free = max(0, figures.free or 0)  # the usable room the payload left: free = usable − used
    segments.append({"name": "free", "x": x, "width": 100.0 * free / limit, "colour": "#e4e8ee",
                     "tokens": figures.free, "muted": True})
    x += 100.0 * free / limit
    for name, key, colour in (("protocol overhead", "protocol_overhead", "#9aa3ad"),
                              ("safety margin", "safety_margin", "#c3c9d0"),
                              ("response reserve", "response_reserve", "#6b7580")):
        width = 100.0 * int(budget.get(key) or 0) / limit
        segments.append({"name": name, "x": x, "width": width, "colour": colour, "tokens": budget.get(key) or 0,
                         "reserved": True})
        x += width
    rows = []
    for index, (name, part) in enumerate(partitions.items()):
        used = int(part.get("used") or 0)
        minimum = int(part.get("minimum") or 0)
        maximum = part.get("maximum")
        rows.append({
            "name": name,
            "colour": _SEGMENT_COLOURS[index % len(_SEGMENT_COLOURS)],
            "used": used,
            "used_pct": min(100.0, 100.0 * used / usable),
            "minimum": minimum,
            "minimum_pct": min(100.0, 100.0 * minimum / usable),
            "maximum": maximum,
            "maximum_pct": min(100.0, 100.0 * int(maximum) / usable) if maximum is not None else None,
            "below_minimum": used < minimum,
            "items": part.get("items"),
            "eviction": part.get("eviction"),
            "borrowed": part.get("borrowed") or 0,
        })
    return {"budget": budget, "segments": segments, "rows": rows, "usable": usable, "limit": limit,
            "usable_pct": 100.0 * usable / limit, "figures": figures}


@register.filter
def token_figures(budget: Any):
    """A step's used / free / usable figures (`manifests.token_figures`) from its budget record."""
    return step_token_figures(budget)


@register.simple_tag(takes_context=True)
def page_query(context: dict[str, Any], param: str, number: int, anchor: str = "") -> str:
    """The current query string with `param` set to page `number` (and an optional #anchor)."""
    params = context["request"].GET.copy()
    params[param] = number
    return f"?{params.urlencode()}" + (f"#{anchor}" if anchor else "")


@register.inclusion_tag("manifests/partials/budget_bar.html", takes_context=True)
def budget_bar(context: dict[str, Any], budget: dict[str, Any], assembly: dict[str, Any]) -> dict[str, Any]:
    """Geometry for the overview's one stacked budget bar (percent of the bar's scale).

    The bar is the usable input budget. The framing reserve comes first, then each partition's
    slot, as wide as the largest of its used tokens, minimum and maximum: the used part filled,
    the rest of the slot tinted, a tick at the minimum and one at the maximum. Whatever the slots
    leave of the usable budget is free. A partition below its minimum is only an error when the
    assembly was blocked for it.
    """
    usable = int(budget.get("usable_input") or 0)
    framing = int(budget.get("framing_reserved") or 0)
    partitions = budget.get("partitions") or {}
    blocked_text = " ".join([*(assembly.get("missing") or []), *(assembly.get("blocked_detail") or []),
                             str(assembly.get("blocked_reason") or "")]) if assembly.get("status") == "blocked" else ""
    slots = []
    for index, (name, part) in enumerate(partitions.items()):
        used, minimum = int(part.get("used") or 0), int(part.get("minimum") or 0)
        maximum = part.get("maximum")
        slots.append({
            "name": name, "used": used, "minimum": minimum, "maximum": maximum,
            "slot": max(used, minimum, int(maximum) if maximum is not None else 0),
            "colour": _SEGMENT_COLOURS[index % len(_SEGMENT_COLOURS)], "items": part.get("items"),
            "eviction": part.get("eviction"), "above_minimum": part.get("above_minimum") or 0,
            "borrowed": part.get("borrowed") or 0, "below_minimum": used < minimum,
            "blocked": bool(blocked_text) and name in blocked_text,
        })
    scale = max(usable, framing + sum(s["slot"] for s in slots), 1)
    x = 100.0 * framing / scale
    for s in slots:
        s["x"] = x
        s["width"] = 100.0 * s["slot"] / scale
        s["used_width"] = 100.0 * s["used"] / scale
        s["min_x"] = x + 100.0 * s["minimum"] / scale if s["minimum"] else None
        s["max_x"] = x + 100.0 * int(s["maximum"]) / scale if s["maximum"] is not None else None
        x += s["width"]
    framing_used = int(budget.get("framing_tokens") or 0)
    # The one token story of a step (manifests.token_figures, as the run page tells it): used = the
    # payload (the items' tokens and the framing), free = usable − used; the slots only draw where room went.
    figures = step_token_figures(budget)
    used = figures.used or 0
    return {
        "budget": budget, "slots": slots, "scale": scale, "usable": usable,
        "framing": {"reserved": framing, "used": framing_used, "width": 100.0 * framing / scale,
                    "used_width": 100.0 * min(framing_used, framing) / scale},
        "free": {"x": x, "width": max(0.0, 100.0 - x), "tokens": figures.free if figures.free is not None else usable - used},
        "used": used,
        "over_usable": scale > usable,
        "request": context.get("request"),
    }


@register.filter
def hashes(assembly: Any) -> list[tuple[str, Any]]:
    """The assembly's identifying hashes as (label, value) pairs, in the order a reviewer compares them."""
    if not isinstance(assembly, dict):
        return []
    return [("assembly_input_hash", assembly.get("assembly_input_hash")),
            ("serialized_model_input_hash", assembly.get("serialized_model_input_hash")),
            ("candidate set", assembly.get("candidate_set_digest"))]
