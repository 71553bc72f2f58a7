"""Downloads of what the dashboard's pages show: a JSON document, or rows as CSV or JSON.

The views (the reviewer pages' in manifests, the impact preview's in policies) resolve tenancy
exactly as the pages do (an object in another tenant is 404, a search reads only the user's
tenants) and hand the rows here; nothing here queries.

CSV is written by the csv module (RFC 4180 quoting: a cell with a comma, quote or line break is
quoted, quotes doubled) and is safe to open in a spreadsheet: a text cell that starts with `=`,
`+`, `-`, `@`, a tab or a carriage return would be read as a formula (CSV injection, OWASP), so
it is prefixed with `'`. Numbers stay numbers. Dicts and lists are written as compact JSON, times
as ISO 8601 in UTC (`…Z`) in both formats.
Row exports stream (StreamingHttpResponse), so a long run or a wide search is never held whole.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse, StreamingHttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
EXPORT_FORMATS = ("csv", "json")


def csv_cell(value: Any) -> Any:
    """One cell as the spreadsheet should read it: text that could start a formula is quoted out."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return value
    if isinstance(value, datetime):
        value = utc_text(value)
    elif isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def utc_text(moment: datetime) -> str:
    """A time as both formats write it: ISO 8601 in UTC, to the microsecond, `Z` for the zone."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class _Line:
    """A file-like target for csv.writer that hands back what was written."""

    def write(self, text: str) -> str:
        return text


def csv_lines(columns: list[str], rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(columns)
    for row in rows:
        yield writer.writerow([csv_cell(row.get(name)) for name in columns])


def json_lines(head: dict[str, Any], key: str, rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """`{...head, key: [rows]}` as JSON, written a row at a time."""
    opening = json.dumps(head, cls=DjangoJSONEncoder, ensure_ascii=False)
    yield opening[:-1] + (", " if head else "") + json.dumps(key) + ": ["
    for index, row in enumerate(rows):
        yield ("," if index else "") + "\n" + json.dumps(row, cls=DjangoJSONEncoder, ensure_ascii=False)
    yield "\n]}\n"


def safe_filename(*parts: str) -> str:
    """A download's file name from ids a user chose: anything but letters, digits, `.`, `_`, `-` becomes `_`."""
    return "-".join(re.sub(r"[^A-Za-z0-9._-]+", "_", part).strip("._")[:80] or "x" for part in parts)


def attachment(response: HttpResponse | StreamingHttpResponse, filename: str) -> HttpResponse | StreamingHttpResponse:
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def rows_response(fmt: str, *, filename: str, columns: list[str], rows: Iterable[dict[str, Any]],
                  head: dict[str, Any]) -> StreamingHttpResponse:
    """`rows` as a CSV (the `columns`, in order) or a JSON document (`head` plus `rows`) download."""
    if fmt == "csv":
        response = StreamingHttpResponse(csv_lines(columns, rows), content_type="text/csv; charset=utf-8")
    else:
        chosen = ({name: utc_text(value) if isinstance(value, datetime) else value
                   for name, value in ((name, row.get(name)) for name in columns)} for row in rows)
        response = StreamingHttpResponse(json_lines(head, "rows", chosen), content_type="application/json; charset=utf-8")
    return attachment(response, f"{filename}.{fmt}")


def document_response(document: Any, *, filename: str) -> HttpResponse:
    body = json.dumps(document, cls=DjangoJSONEncoder, ensure_ascii=False, indent=2) + "\n"
    return attachment(HttpResponse(body, content_type="application/json; charset=utf-8"), filename)
