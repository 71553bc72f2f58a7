"""Versioned context policies: drafts, published (immutable) revisions, structural diffs."""
