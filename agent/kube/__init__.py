"""The Kubernetes API side: the one configured client every caller is handed, list then watch, Events and
pod status, node facts, and what is kept of an object between events."""
