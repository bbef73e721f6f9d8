"""Print Ray's live membership as JSON from the head's state API on localhost (run by ray_cluster)."""
import json
import sys

from ray.util.state import list_nodes

nodes = list_nodes(address="http://%s" % sys.argv[1], detail=True, raise_on_missing_output=False)
alive = [node for node in nodes if node.state == "ALIVE"]
print(json.dumps({
    "alive": sorted(node.node_ip for node in alive),
    "cpus": sum(node.resources_total.get("CPU", 0) for node in alive),
    "gpus": sum(node.resources_total.get("GPU", 0) for node in alive),
}))
