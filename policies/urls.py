"""Policy REST routes (mounted under /api/v1/)."""

from django.urls import path

from . import api

urlpatterns = [
    path("policies/", api.PolicyListApi.as_view(), name="api-policies"),
    path("policies/validate/", api.PolicyValidateApi.as_view(), name="api-policy-validate"),
    path("policies/<str:policy_id>/revisions/", api.RevisionListApi.as_view(), name="api-policy-revisions"),
    path(
        "policies/<str:policy_id>/revisions/<int:revision>/",
        api.RevisionDetailApi.as_view(),
        name="api-policy-revision",
    ),
    path(
        "policies/<str:policy_id>/revisions/<int:revision>/publish/",
        api.RevisionPublishApi.as_view(),
        name="api-policy-revision-publish",
    ),
    path("policies/<str:policy_id>/diff/", api.PolicyDiffApi.as_view(), name="api-policy-diff"),
]
