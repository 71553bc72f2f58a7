"""Reviewer page routes: runs, manifests (and their partials), search, compare, tenant switch."""

from django.urls import path

from . import views

urlpatterns = [
    path("tenant/", views.tenant_switch, name="tenant-switch"),
    path("runs/", views.runs, name="runs"),
    path("runs/<path:run_id>/", views.run_detail, name="run"),
    path("assemblies/<str:job_id>/", views.assembly_detail, name="assembly"),
    path("assemblies/<str:job_id>/item/", views.assembly_item, name="assembly-item"),
    path("assemblies/<str:job_id>/input/", views.assembly_input, name="assembly-input"),
    path("assemblies/<str:job_id>/<str:section>/", views.assembly_section, name="assembly-section"),
    path("why/", views.why, name="why"),
    path("compare/", views.compare, name="compare"),
    path("usage/", views.usage, name="usage"),
]
