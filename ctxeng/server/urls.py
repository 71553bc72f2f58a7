"""Root URLs: the REST API under /api/v1/, its schema and docs, admin, health, the favicon, and the dashboard pages."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from manifests import views as manifest_views

from . import views
from .csp import with_inline_styles

urlpatterns = [
    path("", manifest_views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("policies.urls")),
    path("api/v1/", include("manifests.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's init script as a file: no inline script under the CSP.
    path("api/docs/", with_inline_styles(SpectacularSwaggerSplitView.as_view(url_name="api-schema")), name="api-docs"),
    path("login/", auth_views.LoginView.as_view(template_name="ctxeng/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("", include("manifests.urls_pages")),
    path("", include("policies.urls_pages")),
    path("", include("ctxeng.accounts.urls")),
]

handler400 = "ctxeng.server.views.bad_request"
handler404 = "ctxeng.server.views.not_found"
handler403 = "ctxeng.server.views.permission_denied"
handler500 = "ctxeng.server.views.server_error"
