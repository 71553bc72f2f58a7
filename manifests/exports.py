"""The dashboard's downloads live in ctxeng.server.exports (the policies app's impact export uses
them too, and policies does not import manifests); the reviewer views import them from here."""

from ctxeng.server.exports import (  # noqa: F401 - re-exported
    EXPORT_FORMATS,
    FORMULA_STARTS,
    attachment,
    csv_cell,
    csv_lines,
    document_response,
    json_lines,
    rows_response,
    safe_filename,
    utc_text,
)
