"""GPU partitioning of a reference node (docs/PARTITIONING.md): MIG tables, partition configs, simulated devices.

Pure: no I/O except :func:`refplatform.gpu.partition.load_partition_config` reading its one file.
"""

from refplatform.gpu.device import DeviceSet, Slice
from refplatform.gpu.mig import PartitionError
from refplatform.gpu.partition import PartitionConfig, advertise, load_partition_config, parse_partition_config

__all__ = ["DeviceSet", "PartitionConfig", "PartitionError", "Slice", "advertise", "load_partition_config",
           "parse_partition_config"]
