"""Policy page routes: list, history, draft editor, diff, impact preview, publish."""

from django.urls import path

from . import views

urlpatterns = [
    path("policies/", views.policy_list, name="policies"),
    path("policies/<str:policy_id>/", views.policy_detail, name="policy"),
    path("policies/<str:policy_id>/revisions/new/", views.revision_new, name="policy-revision-new"),
    path("policies/<str:policy_id>/revisions/<int:revision>/edit/", views.revision_edit, name="policy-revision-edit"),
    path("policies/<str:policy_id>/revisions/<int:revision>/impact/", views.revision_impact,
         name="policy-revision-impact"),
    path("policies/<str:policy_id>/revisions/<int:revision>/impact/run/", views.revision_impact_run,
         name="policy-revision-impact-run"),
    path("policies/<str:policy_id>/revisions/<int:revision>/impact/<str:preview_id>/", views.revision_impact_preview,
         name="policy-revision-impact-preview"),
    path("policies/<str:policy_id>/revisions/<int:revision>/impact/<str:preview_id>/export.<str:fmt>",
         views.revision_impact_export, name="policy-revision-impact-export"),
    path("policies/<str:policy_id>/revisions/<int:revision>/impact/<str:preview_id>/cancel/",
         views.revision_impact_cancel, name="policy-revision-impact-cancel"),
    path("policies/<str:policy_id>/revisions/<int:revision>/publish/", views.revision_publish,
         name="policy-revision-publish"),
    path("policies/<str:policy_id>/diff/", views.revision_diff, name="policy-diff"),
]
