"""Tenants, runs, assembly jobs, sealed manifests and their per-item rows, artifacts; REST API and worker."""
