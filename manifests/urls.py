"""Assembly, item-decision and artifact REST routes (mounted under /api/v1/)."""

from django.urls import path

from . import api

urlpatterns = [
    path("assemblies/", api.AssemblyListApi.as_view(), name="api-assemblies"),
    path("assemblies/<str:job_id>/", api.AssemblyDetailApi.as_view(), name="api-assembly"),
    path("assemblies/<str:job_id>/manifest/", api.AssemblyManifestApi.as_view(), name="api-assembly-manifest"),
    path("assemblies/<str:job_id>/input/", api.AssemblyInputApi.as_view(), name="api-assembly-input"),
    path("assemblies/<str:job_id>/request/", api.AssemblyRequestApi.as_view(), name="api-assembly-request"),
    path("assemblies/<str:job_id>/usage/", api.AssemblyUsageApi.as_view(), name="api-assembly-usage"),
    path("items/<path:item_id>/decisions/", api.ItemDecisionsApi.as_view(), name="api-item-decisions"),
    path("artifacts/", api.ArtifactListApi.as_view(), name="api-artifacts"),
    path("runs/<path:run_id>/close/", api.RunCloseApi.as_view(), name="api-run-close"),
    path("recorded-steps/", api.RecordedStepsApi.as_view(), name="api-recorded-steps"),
]
