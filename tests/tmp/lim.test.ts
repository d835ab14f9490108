import { it } from 'vitest';
import { attentionTestRuntime } from '../helpers/gpu';
it('lim', async () => { const rt = await attentionTestRuntime(); console.log(rt.device.limits.maxStorageBuffersPerShaderStage, rt.device.limits.maxComputeWorkgroupStorageSize); });
