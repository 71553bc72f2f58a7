"""The audit trail: who changed a policy revision or an API token, when, and which digest."""
