"""A request for a host not in ALLOWED_HOSTS: Django refuses it before any view (DisallowedHost),
through handler400 (`ctxeng.server.views.bad_request`): a JSON 400 under /api/, the HTML 400 page
elsewhere, never a 500 or a traceback."""

from __future__ import annotations


def test_an_api_request_for_another_host_is_a_json_400_naming_the_host(client):
    client.raise_request_exception = False  # as a server does: Django's handler answers
    response = client.get("/api/v1/policies/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    [problem] = response.json()["errors"]
    assert problem.startswith("Invalid HTTP_HOST header: 'evil.example'.")


def test_a_dashboard_request_for_another_host_is_the_html_400_page(client):
    client.raise_request_exception = False
    response = client.get("/runs/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert "Bad request" in body and "Invalid HTTP_HOST header: &#x27;evil.example&#x27;." in body
    assert "Traceback" not in body
