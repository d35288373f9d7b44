"""Roles placed on a Ray cluster: reward workers and rollout replicas as actors.

Needs the `ray` extra (pip install 'ascent[ray]'); nothing here is imported unless
`[cluster] backend = "ray"`.
"""
