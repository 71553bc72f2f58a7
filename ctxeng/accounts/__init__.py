"""Tenancy: tenants, the users' roles in them (memberships), and API tokens; the people page."""
