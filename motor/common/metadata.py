"""gRPC metadata keys of Motor's contracts, in one place for servers, clients and tests."""

# The Coordinator's shared management key on Refresh (when one is configured).
MANAGEMENT_KEY_METADATA = "x-motor-key"

# The Controller leader's fencing term (decimal: the etcd revision that created its leader key) on
# every call it makes to a NodeManager or the Coordinator, and in the trailing metadata of its
# answers to NodeManagers. Receivers refuse calls carrying a lower term than one they have seen
# (`motor.common.term_fence`): a deposed leader cannot act even in the instant after its lease ended.
LEADER_TERM_METADATA = "x-motor-leader-term"
# In the trailing metadata of a standby Controller's UNAVAILABLE: the leader's address (host:port),
# empty while no leader is known. Its presence tells the caller a replica answered as a standby.
LEADER_ADDRESS_METADATA = "x-motor-leader"
