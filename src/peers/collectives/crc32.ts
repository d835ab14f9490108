/** The peers' checksum is the engine's (tensor parallelism's run fingerprint uses it too). */
export { crc32, crc32Update } from '../../engine/util/crc32';
