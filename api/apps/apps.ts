// The app aggregate is domain/apps.ts; api/auth reads it through here until it imports it from there.
export { appStream, apps } from '../../domain/apps.ts';
