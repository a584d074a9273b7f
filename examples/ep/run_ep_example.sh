#!/usr/bin/env bash
# Starts examples/ep/ep_layer_example once per GPU (rank r on GPU r) with the torchrun-style
# environment (RANK, WORLD_SIZE, LOCAL_RANK) and a fresh file for the NCCL unique id.
#   examples/ep/run_ep_example.sh <build dir> [num GPUs, default: all] [example flags...]
# torchrun works too: torchrun --nproc-per-node N --no-python <build>/examples/ep/ep_layer_example
#   --id-file /tmp/some-new-file
set -euo pipefail
build=${1:?usage: run_ep_example.sh <build dir> [num GPUs] [flags...]}
gpus=${2:-$(nvidia-smi -L | wc -l)}
shift $(( $# >= 2 ? 2 : 1 ))
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the shared machines
id_file=$(mktemp -u "${TMPDIR:-/tmp}/cakemoe_ep_id.XXXXXX")
pids=()
for ((r = 0; r < gpus; ++r)); do
  RANK=$r WORLD_SIZE=$gpus LOCAL_RANK=$r \
    "$build/examples/ep/ep_layer_example" --id-file "$id_file" "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
rm -f "$id_file"
exit $status
