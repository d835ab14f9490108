/** One colour per run (by its position in the run list), and per memory category. */
import type { MemCategory } from '../engine/gpu/memory';

const RUN_COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777'];

export function runColor(index: number): string {
  return RUN_COLORS[((index % RUN_COLORS.length) + RUN_COLORS.length) % RUN_COLORS.length];
}

export const CATEGORY_COLORS: Record<MemCategory, string> = {
  weights: '#2563eb',
  grads: '#f59e0b',
  optimizer: '#8b5cf6',
  activations: '#10b981',
  workspace: '#94a3b8',
  comm: '#ef4444',
};
