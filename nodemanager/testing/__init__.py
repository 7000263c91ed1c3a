"""Test and benchmark doubles of the NodeManager's peers: a light FT engine and a Controller.

They stand in for the *peers* (engine HTTP API, Controller gRPC), never for NodeManager parts.
"""
