#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_mpi.sh loopback|netns MPI_PINGPONG: a 2-rank Open MPI 4.1 job (mpi_pingpong.c: ping-pong
# of 64 B .. 1 MiB with every byte checked, then an MPI_Allreduce) over the OFI MTL with
# libfabric's verbs;ofi_rxm on uiwarp, launched with mpirun as a user would:
#   loopback: both ranks on this host;
#   netns:    one rank in each of two network namespaces (two_hosts). mpirun runs in host A and
#             starts its orted in host B through tests/consumers/netns-rsh (plm_rsh_agent, the
#             stand-in for ssh), with a hostfile naming the two veth addresses.
# Then it checks that the job's traffic went over uiwarp (uiwarpd counted the connections), and
# reports why the openib BTL does not run (Debian's build offers only the udcm CPC).
source "$(dirname "$0")/lib.sh"
need openmpi-bin mpirun ompi_info
PROG=${2:?usage: test_mpi.sh loopback|netns MPI_PINGPONG}
[[ -x $PROG ]] || { echo "skipped: $PROG was not built (libopenmpi-dev)"; exit 77; }
UIWARP=${UIWARP_CLI:?UIWARP_CLI must name the uiwarp CLI}
mpirun=(mpirun)
# Open MPI refuses to run as root unless told; the tests run as root for the namespaces.
[[ $(id -u) != 0 ]] || mpirun+=(--allow-run-as-root)
mpirun+=(-np 2 --mca pml cm --mca mtl ofi -x "FI_PROVIDER=verbs;ofi_rxm" -x UIWARP_STATE_DIR -x PATH)
if [[ $MODE == netns ]]; then
  # libfabric's verbs provider, asked for no address (the OFI MTL asks so), binds the name
  # localhost: TWO_HOSTS_LOCALHOST makes it name each host's veth address (README).
  TWO_HOSTS_LOCALHOST=1 two_hosts 10.231.24
  printf '%s %s\n%s %s\n' "$IP_A" "$HOST_A" "$IP_B" "$HOST_B" >"$T/hostmap"
  printf '%s slots=1\n%s slots=1\n' "$IP_A" "$IP_B" >"$T/hostfile"
  export NETNS_RSH_MAP=$T/hostmap
  mpirun+=(--hostfile "$T/hostfile" --mca plm_rsh_agent "$CONSUMERS_DIR/netns-rsh"
    --mca oob_tcp_if_include "$IP_A/24" --mca btl_tcp_if_include "$IP_A/24")
  in_a=(ip netns exec "$HOST_A")
  nss=("$HOST_A" "$HOST_B")
else
  in_a=()
  nss=("")
fi
label=$(where)
# established COUNT: the connections uiwarpd established, per host ("counters: connect N
# (established M, ...").
established() {
  local ns total=0 n
  for ns in "${nss[@]}"; do
    n=$(${ns:+ip netns exec "$ns"} "$UIWARP" status 2>/dev/null |
      sed -nE 's/^counters: connect [0-9]+ \(established ([0-9]+),.*/\1/p')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
before=$(established)
timeout 300 "${in_a[@]}" "${mpirun[@]}" "$RUN" "$PROG" 20 >"$T/mpi.out" 2>&1
rc=$?
check "mpirun exits 0$label (exit $rc)" test "$rc" -eq 0
check "one rank in each host$label" test "$(grep -c '^rank [01] of 2 on ' "$T/mpi.out")" -eq 2
for size in 64 4096 65536 1048576; do
  check "ping-pong of $size B, data verified$label" \
    grep -qE "^pingpong +$size B x 20: data verified" "$T/mpi.out"
done
check "MPI_Allreduce verified$label" grep -q "^allreduce of 1000 longs: sum and max verified" "$T/mpi.out"
check "mpi-pingpong OK$label" grep -q "^mpi-pingpong OK" "$T/mpi.out"
after=$(established)
check "the ranks connected over uiwarp (uiwarpd established $((after - before)) connections)$label" \
  test "$after" -gt "$before"
((FAIL == 0)) || tail -n 30 "$T/mpi.out"
sed -n 's/^pingpong /note - pingpong /p' "$T/mpi.out"

# The openib BTL with the rdmacm CPC: Debian's Open MPI 4.1.4 is built without it (no
# --enable-openib-rdmacm; mca_btl_openib.so does not link librdmacm) and its only CPC, udcm,
# needs UD QPs, which iWARP does not have. Reported, not failed; the test notices a change.
cpcs=$(ompi_info --param btl openib --level 9 2>/dev/null |
  grep -oP 'select OpenFabrics connections \(valid values: \K[^)]*' | head -n 1)
if [[ -n $cpcs && $cpcs != *rdmacm* ]]; then
  echo "note - openib BTL not run: this Open MPI's openib CPCs are '$cpcs' (no rdmacm; udcm needs UD QPs)"
elif [[ -n $cpcs ]]; then
  bad "this Open MPI offers the openib rdmacm CPC ('$cpcs'): add the openib case to test_mpi.sh"
fi
finish
