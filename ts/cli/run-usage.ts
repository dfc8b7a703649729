// What `hora run --help` prints: every flag of run-args.ts, grouped by purpose.

export const RUN_USAGE = `Usage: hora run [-np N] [options] [--] command [args...]

Starts N copies of command as one hora job: hosts the rendezvous server, sets
HORA_RANK, HORA_SIZE, ... in each worker, prefixes worker output with [rank]
([rank@host] when a host is remote), and stops every worker when one fails.
Exits with the failed worker's status (128 + signal number when it was killed
by a signal), 0 when all succeed.

Job layout:
  -np, -n, --np, --num-proc N
                              number of worker processes (default: all slots of -H or
                              --hostfile; without them, as mpirun, one per core of this
                              machine: the cores this process may run on)
  -H, --hosts, --host HOST:SLOTS,...
                              hosts and worker slots, filled in order (default
                              localhost:N; inside a Slurm allocation, as mpirun, its nodes
                              with SLURM_TASKS_PER_NODE slots, started with srun);
                              HOST may be user@host; SLOTS defaults to 1
  --hostfile, --machinefile FILE
                              hosts from FILE, one "host slots=N" a line (# comments)
  --nproc-per-node, --nproc_per_node N
                              torchrun's spelling: N workers on each host (this machine,
                              or every host of -H or --hostfile); N may be cpu or auto
                              (one per core); not with -np
  --nnodes M                  torchrun's host count; hora run starts the workers of every
                              host itself, so M must be the number of hosts of -H or
                              --hostfile (1 without them)
  --standalone                torchrun's one-machine job: what hora run does without -H
                              (also inside a Slurm allocation)
  --simulate-hosts            treat every local -H entry as a separate host with its own
                              HORA_HOST_ID, to exercise multi-host code on one machine
  Other launchers' flags that hora run spells differently (--master-addr, --master-port,
  --rdzv-endpoint, --rdzv-backend, --node-rank, --max-restarts, --log-dir, --redirects,
  --tee, --oversubscribe) are refused with the hora run flag to use.

CPU binding:
  --bind-to core|none         core: bind each worker to one core of its host (every
                              hardware thread of the core), with taskset of util-linux,
                              on remote hosts too; cores are those the launcher (or the
                              ssh login on a remote host) may run on. With more workers
                              than cores on a host they are bound round-robin, and hora run
                              says so once. Default none: the OS places workers
  --map-by core|socket        which core the host's local rank i is bound to: the i-th
                              (core) or one socket after another (socket); implies
                              --bind-to core. Not in an elastic job (--min-np)

Output:
  --output-filename DIR       also write each worker's stdout and stderr, as the worker
                              wrote them, to DIR/rank.N/stdout and DIR/rank.N/stderr (N
                              padded to the width of the largest rank, as horovodrun does;
                              DIR/worker.N in an elastic job); remote workers' output is
                              written here too. The terminal shows the same [rank] lines
  --tag-output                mpirun's spelling of what hora run always does: [rank] labels

Remote hosts (any host that is not this machine is reached over ssh):
  -p, --ssh-port PORT         ssh port on the remote hosts
  -i, --ssh-identity FILE     ssh private key
  --ssh-opts "OPTS"           more ssh options, split like a shell would,
                              e.g. --ssh-opts "-F ./ssh_config -o User=train"
  Remote workers run the same node binary (for command "node", this node), in the
  same working directory, with the same script path: these must exist on every
  host. ssh must log in without a prompt (keys or an agent). A failed ssh or
  remote worker stops the job.

Worker environment:
  -x NAME                     set NAME in every worker to its value here (an error if
                              it is unset here); repeatable
  -x NAME=VALUE               set NAME to VALUE in every worker; repeatable
  HORA_RUN_EXPORT="A,B=1"     the same as -x A -x B=1, read from this environment
                              (-x wins for a name in both)
  Local workers inherit this environment whole. Remote workers get what their
  login on that host gives (sshd and the shell: PATH, HOME, ...), then this
  environment's HORA_* variables, then the -x and HORA_RUN_EXPORT variables;
  nothing else is forwarded. Values travel over the ssh connection, never on a
  command line; but -x NAME=VALUE puts VALUE on hora run's own command line:
  pass a secret as -x NAME from the environment.

Network:
  --iface NAME|ADDR           HORA_IFACE: interface or address the rendezvous server
                              binds to and workers use for the data plane. Without it,
                              a job with remote hosts binds the address that routes to
                              the first of them. An address applies to this machine
                              only; an interface name is passed to remote workers too.
                              hora run warns at once when that address is on a subnet
                              none of the remote hosts is on.
  Workers that cannot reach the rendezvous server warn every 10 s (address, OS error,
  what chose the address) and fail after HORA_CONNECT_TIMEOUT_S (default 30).

Timeouts and shutdown:
  --timeout S                 seconds, from the first registration, for all workers to
                              register (default HORA_TIMEOUT_S, 300)
  --grace S                   seconds between Abort, SIGTERM and SIGKILL when the job
                              ends early (default 5)

Elastic training (the training function runs in hora.elastic.run, see docs/elastic.md):
  --min-np A                  go on with at least A workers when workers are lost: the
                              survivors roll back to their last commit, re-form the world
                              with new ranks and go on (without it, a lost worker ends the
                              job); A <= -np
  --max-np B                  most workers in one world (default -np). A failed worker's
                              slot is refilled with a new worker, which joins at the
                              ranks' next commit
  --elastic-timeout S         seconds the job may wait with fewer than A workers before
                              it fails (default 600)
  --host-discovery-script S   instead of -H: the executable S prints the hosts that may run
                              workers now, one "host[:slots]" a line; it runs once before
                              the start (a failure or a bad line is an error) and then every
                              second: new hosts and slots get workers up to --max-np, which
                              join at the next commit; a host that leaves the list has its
                              workers stopped; a failed run is retried and its stderr shown
  A host where a worker fails is blacklisted: no new worker starts there (in a -H job this
  machine's own entries are exempt unless --simulate-hosts is given).
  HORA_ELASTIC_SETTLE_S (default 10) gives the survivors of a loss that long to
  re-register; one that has not (a stopped process) is killed and left out. A worker
  that fails before it enters hora.elastic.run (a syntax error) still ends the job.

Tuning (passed to workers as HORA_* variables, see \`hora env\`):
  --fusion-mb MB              HORA_FUSION_MB, fusion buffer size
  --algo NAME                 HORA_ALGO, allreduce algorithm
  --transport T               HORA_TRANSPORT: auto, tcp or shm
  --topology GRID             HORA_TOPOLOGY, grid of the multi-dimensional allreduce,
                              fastest dimension first, e.g. 4x8x2

Logging and timeline:
  --debug LEVEL               HORA_DEBUG for launcher and workers: WARN, INFO, TRACE
  --timeline FILE             HORA_TIMELINE, write a Chrome trace of every collective;
                              the ranks' files are merged into FILE when the job ends

Monitoring:
  --dashboard [PORT]          serve a live page of the job on http://127.0.0.1:PORT/
                              (default: a free port; the URL is printed at start):
                              collectives/s and bytes/s per rank, busbw per kind,
                              compute/communication split of steps, stalled ranks
  On a terminal a status line (ranks up, collectives/s, bytes/s) stays below the
  workers' output. HORA_STALL_WARN_S (default 60) sets when ranks that have not
  submitted a collective the others wait in are named.

  -h, --help                  show this help

Examples:
  hora run -np 4 node train.js --epochs 3
  hora run --bind-to core --output-filename logs node train.js
  hora run -H node1:4,node2:4 node train.js
  hora run --hostfile hosts.txt -i ~/.ssh/cluster_key node train.js
`;
