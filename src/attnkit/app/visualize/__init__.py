"""Pictures: attention maps, detections, run reports."""
