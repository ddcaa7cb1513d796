"""Vertical pod autoscaling in place: VPA objects, and what their recommendations make of a pod."""
