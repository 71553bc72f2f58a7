"""People page routes (tenant admins), the set-password page a link opens, and the user's own time display."""

from django.urls import path

from . import views

urlpatterns = [
    path("people/", views.people, name="people"),
    path("people/<int:user_id>/role/", views.person_role, name="person-role"),
    path("people/<int:user_id>/token/", views.person_token, name="person-token"),
    path("people/<int:user_id>/token/revoke/", views.person_token_revoke, name="person-token-revoke"),
    path("people/<int:user_id>/password-link/", views.person_password_link, name="person-password-link"),
    path("set-password/<uidb64>/<token>/", views.SetPasswordView.as_view(), name="set-password"),
    path("account/time-display/", views.time_display_set, name="time-display"),
]
