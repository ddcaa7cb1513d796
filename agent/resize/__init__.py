"""In-place pod resize: desired / allocated / actual, admission, ordering, policy, checkpoint."""
