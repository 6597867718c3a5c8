"""The NVML node agent: samples the GPUs of one node, serves DCGM-style metrics and pushes
telemetry to the controller. It runs on the GPU nodes, not beside the controller, so it imports
only the domain types (the wire format is `domain.telemetry`) and never the controller."""
