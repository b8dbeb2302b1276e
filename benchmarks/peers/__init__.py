"""neural_arch against raw DDP, Lightning Fabric and Accelerate: ``.venv/bin/python -m benchmarks.peers.peers``
(see README.md here).
"""
