/** How a group run's failure reads in the panel: a title and the detail for the run's box. */
import { DpError } from '../../parallel/dp/dp';
import { CollectiveError } from '../../peers/collectives/group';
import { DeviceLostError, WebGpuUnavailableError } from '../../engine/gpu/device';

export function errorText(e: unknown): string {
  return e instanceof Error ? e.message || e.name : String(e);
}

const DP_ERROR_TITLES: Record<string, string> = {
  diverged: 'Weights diverged', 'state-rejected': 'Received state rejected', 'config-mismatch': 'Members disagree on the run',
  refused: 'Refused by the group', 'no-group': 'Could not join the group', 'regroup-failed': 'The group could not re-form', removed: 'Removed by the group',
};

/** Why a run ended in error, as a title and the detail for the run's box. */
export function runError(e: unknown, run: { failure: string | null; tensorParallel: boolean; completed: number }): { title: string; message: string } {
  if (run.failure !== null) return { title: 'The run cannot continue', message: run.failure };
  if (e instanceof DpError) return { title: DP_ERROR_TITLES[e.code] ?? 'Data-parallel run stopped', message: e.message };
  if (e instanceof CollectiveError && e.code === 'peer-left' && run.tensorParallel) {
    return { title: 'A member left', message: `${e.message}: tensor parallelism cannot continue without its shard; stopped after step ${run.completed} (each member keeps its shard of that step)` };
  }
  if (e instanceof WebGpuUnavailableError) return { title: 'WebGPU unavailable', message: e.message };
  if (e instanceof DeviceLostError) return { title: 'GPU device lost', message: e.message };
  return { title: 'Training failed', message: errorText(e) };
}
