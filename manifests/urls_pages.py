"""Reviewer page routes: runs, manifests (and their partials, window tab and JSON downloads), search,
compare, exports (CSV and JSON of /why/, of a run's timeline and of two runs compared step by step), tenant switch."""

from django.urls import path

from . import views

urlpatterns = [
    path("tenant/", views.tenant_switch, name="tenant-switch"),
    path("runs/", views.runs, name="runs"),
    path("runs/<path:run_id>/timeline.<str:fmt>", views.run_timeline_export, name="run-timeline-export"),
    path("runs/<path:run_id>/matrix/", views.run_matrix, name="run-matrix"),
    path("runs/<path:run_id>/window/", views.run_window_region, name="run-window"),
    path("runs/<path:run_id>/search/", views.run_search, name="run-search"),
    path("runs/<path:run_id>/", views.run_detail, name="run"),
    path("assemblies/<str:job_id>/", views.assembly_detail, name="assembly"),
    path("assemblies/<str:job_id>/item/", views.assembly_item, name="assembly-item"),
    path("assemblies/<str:job_id>/input/", views.assembly_input, name="assembly-input"),
    path("assemblies/<str:job_id>/window/", views.assembly_window, name="assembly-window"),
    path("assemblies/<str:job_id>/export/<str:document>.json", views.assembly_export, name="assembly-export"),
    path("assemblies/<str:job_id>/<str:section>/", views.assembly_section, name="assembly-section"),
    path("why/", views.why, name="why"),
    path("why/export.<str:fmt>", views.why_export, name="why-export"),
    path("compare/", views.compare, name="compare"),
    path("compare/export.<str:fmt>", views.compare_export, name="compare-export"),
    path("usage/", views.usage, name="usage"),
]
