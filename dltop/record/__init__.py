"""The flight recorder: ``dltop record`` writes a job's Snapshots to a file; ``dltop replay`` reads them."""
