"""gRPC metadata keys of Motor's contracts, in one place for servers, clients and tests."""

# The Coordinator's shared management key on Refresh (when one is configured).
MANAGEMENT_KEY_METADATA = "x-motor-key"
