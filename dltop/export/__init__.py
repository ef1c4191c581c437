"""``dltop exporter``: every training job on this node as Prometheus metrics."""
